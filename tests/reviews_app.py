"""A small app with every shape real exports show: joins, async calls, variable repetition,
calls to untraced databases and caches (used by the simulator and reconstruction tests)."""

from __future__ import annotations

import yaml

from tacit.simulate import AppSpec, parse_app

UNTRACED = ("mongo", "cache")
"""Services a Jaeger export of this app would not show (their callers' spans are leaves)."""

REVIEWS = """
name: reviews
network: {latency_us: 80, jitter_us: 40}
clock_skew_us: 100
roots:
  - {service: gateway, endpoint: Compose}
services:
  gateway:        # fans out to three services, which all reach the join
    workers: 64
    endpoints:
      Compose:
        median_ms: 0.3
        sigma: 0.3
        calls:
          - parallel:
              - {service: text, endpoint: Upload}
              - {service: user, endpoint: Upload}
              - {service: movie, endpoint: Upload}
  text:
    workers: 16
    endpoints:
      Upload: {median_ms: 0.4, sigma: 0.4, calls: [{service: compose, endpoint: UploadText}]}
  user:           # a cache lookup first
    workers: 16
    endpoints:
      Upload:
        median_ms: 0.3
        sigma: 0.4
        calls:
          - {service: cache, endpoint: memcached.get}
          - {service: compose, endpoint: UploadUser}
  movie:          # one lookup per item: one to four of them
    workers: 16
    endpoints:
      Upload:
        median_ms: 0.3
        sigma: 0.4
        calls:
          - {service: catalog, endpoint: Lookup, repeat: [1, 4]}
          - {service: compose, endpoint: UploadMovie}
  catalog:
    workers: 16
    endpoints:
      Lookup: {median_ms: 0.2, sigma: 0.5}
  compose:        # the join: the last of the three calls onward for all
    workers: 32
    join:
      size: 3
      calls:
        - parallel:
            - {service: store, endpoint: Save}
            - {service: timeline, endpoint: Post}
    endpoints:
      UploadText: {median_ms: 0.2, sigma: 0.6}
      UploadUser: {median_ms: 0.2, sigma: 0.6}
      UploadMovie: {median_ms: 0.2, sigma: 0.6}
  store:          # an asynchronous insert, not awaited
    workers: 16
    endpoints:
      Save:
        median_ms: 0.3
        sigma: 0.3
        calls:
          - {service: mongo, endpoint: mongo.insert, detached: true}
          - {service: cache, endpoint: redis.set}
  timeline:
    workers: 16
    endpoints:
      Post: {median_ms: 0.4, sigma: 0.4}
  mongo:
    workers: 32
    endpoints:
      mongo.insert: {median_ms: 0.6, sigma: 0.3}
  cache:
    workers: 32
    endpoints:
      memcached.get: {median_ms: 0.05, sigma: 0.3}
      redis.set: {median_ms: 0.05, sigma: 0.3}
"""


def reviews_app() -> AppSpec:
    return parse_app(yaml.safe_load(REVIEWS), "reviews")
