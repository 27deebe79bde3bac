"""Parameters of Pirate's response-latency estimator.

Pirate: B. Vannarth Shobhana, Y. Chien, M. Doughten, J. Diamant, B. Nath, S. Landau Feibish,
S. Narayana, "Measuring (Round-Trip) Response Latencies Under Asymmetric Routing",
arXiv 2505.14358. Only the client-to-server packets of a connection are seen; after a burst a
client pauses until a response arrives, so the packet after a prominent inter-packet gap (IPG)
was triggered by a response, and the gaps of such causal pairs estimate the client-visible
response latency (§3).

Defaults follow the paper's text (``../shared/papers/pirate-response-latency.txt`` in the
workspace): N = 10 modes (§3.4), Algorithm 2's absolute ε, the proportional mode sum (§3.3),
the two §3.4 heuristics. Where the paper gives no value, the docstring below says so and gives
the reason for the value chosen; the timer values are the RFCs' own.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from tacit.errors import ConfigError

US = 1_000
MS = 1_000_000
SECOND = 1_000_000_000


@dataclass(frozen=True)
class PirateParams:
    """Everything the estimator can be told; all times in ns.

    Gap detection (§3.3):

    - ``gap_threshold_ns`` (δ): Algorithm 1 takes every candidate IPG longer than δ as one
      response latency; the centre-tracking histogram counts a mode as a response mode when its
      centre is at least δ. The paper gives no value (§3.2 argues no fixed δ fits, which is why
      Algorithm 2 exists). Chosen: 1 ms, above the back-to-back spacing of a burst (a 1500-byte
      frame takes 0.12 ms at 100 Mbit/s) and a client's processing between requests it issues
      together, below any wide-area round trip.
    - ``max_modes`` (N): modes kept per connection by Algorithm 2: 10, the paper's (§3.4: "as
      few as N = 10 buckets ... prove sufficient").
    - ``mode_epsilon_ns`` (ε of Algorithm 2): a gap within ε of a mode's ``[min, max]`` joins
      it, and two modes within ε merge. The paper calls it "a fixed parameter" without a value.
      Chosen: 100 µs, above the spacing of back-to-back packets and a client's scheduling noise
      on a LAN (so one burst's gaps make one mode), below the millisecond response latencies of
      the paper's experiments.
    - ``mode_epsilon_ratio``: tacit widens ε around a mode to this ratio of the mode's ``max``
      when that is larger (:mod:`~tacit.response_latency.mode_sum` says why: a fixed ε splits
      the batch-ending gaps of a noisy service into modes, and a lone gap becomes the IBG).
      0 gives the paper's fixed ε. Chosen: 0.25, the spread of one service's latency within an
      epoch that still counts as one mode; the reproduction report shows 0 beside it.
    - ``ibg_min_share``: tacit lets a mode be the inter-batch gap only when it holds at least
      this share of the epoch's gaps (the paper takes the largest mode, which may be one
      outlier; :mod:`~tacit.response_latency.mode_sum`). 0 gives the paper's rule. Chosen:
      0.05, so that batches of up to 20 requests per response still make an IBG mode.
    - ``ibg_spread_ratio``: the modes below the IBG whose mean is at least this ratio of the
      IBG's count as inter-batch gaps too (:mod:`~tacit.response_latency.mode_sum`: a
      connection's latency varies within an epoch and its batch ends then fill several modes).
      0 gives the paper's rule (only the largest mode). Chosen: 0.5, the factor-2 valley of
      ``mode_floor_ratio`` below: a batch's own gaps (back-to-back packets, the server's
      spacing of pipelined responses) sit far below it.
    - ``ibg_min_time_share``: the inter-batch gaps (the IBG's and those the spread counts) must
      hold at least this share of the time the estimate sums, or the next eligible mode down
      is the IBG. Equivalently, the estimate is at most ``1 / ibg_min_time_share`` times the
      inter-batch gaps' mean: a batch spends no more than three times its closing wait in the
      gaps inside it. Without it, when one request is in flight and a throttled server spreads
      the latencies beyond the factor of ``ibg_spread_ratio``, a slow tail holding a small share
      of the gaps can become the IBG, the other responses then count as gaps inside batches, and
      the epoch is estimated at many times its latency (:mod:`~tacit.response_latency.mode_sum`).
      0 gives the paper's rule. Chosen: 0.25, high enough to keep such a tail from being the IBG
      and low enough for batches of many requests in flight (HTTP/3 with many streams), whose
      own gaps hold more of their time; ``bench/bench_pirate_reproduction.py`` scores the
      workloads with the count alone beside it.
    - ``merge_epsilon``: ε of tacit's centre-tracking histogram (``algorithm="centres"``),
      *relative* to a mode's centre so that one value serves µs and s scales. Chosen: 0.25.
    - ``epoch_ns``: one estimate per connection per epoch of this length (epochs are aligned to
      multiples of it since the Unix epoch): 100 ms, the epoch of the paper's own example
      (§3.3, the memory cost of fine histograms); the paper makes it configurable.

    §3.4 heuristics:

    - ``coalesce_acks``: pure ACKs (TCP: the ACK flag only, no payload) and, for UDP
      (encrypted QUIC), datagrams of at most ``udp_ack_max_payload`` bytes are taken for
      acknowledgements and skipped: they are clocked by the server's data, not by the client's
      application. ``udp_ack_max_payload`` chosen: 64 bytes (a QUIC 1-RTT packet carrying only
      an ACK frame: 1-byte header, ≤ 20-byte connection ID, ≤ 4-byte packet number, a few
      bytes of ACK frame and the 16-byte AEAD tag; RFC 9000 §17.3, RFC 9001 §5.3).
    - ``batch_end_only``: only an IPG after a packet smaller than the connection's largest
      (full-size, MTU) segment may be a response gap; after a full-size segment more of the
      same burst is coming. A connection's full size is the largest payload it has sent,
      trusted once it reaches ``min_full_payload`` (1200 bytes: QUIC's minimum datagram size,
      RFC 9000 §14, and below the 1220-byte TCP MSS of the IPv6 minimum MTU, RFC 8200 §5).

    Pipelining clients, for tacit's centre-tracking histogram (``algorithm="centres"``, tacit's
    own, not the paper's; Algorithm 2's proportional mode sum answers the same
    problem by adding the gaps inside a batch to the inter-batch gap): a client with several
    requests in flight sends the requests one response lets go back to back, and the next gap
    ends when the response to the *first* of them arrives; the gap after the last packet is
    shorter than that causal pair, and the gaps ended by the responses that follow close behind
    are shorter still. Two changes, off by default; :meth:`PirateParams.pipelining` turns both
    on:

    - ``from_burst_start``: a gap longer than the connection's δ is measured from the first
      packet of the burst before it (the run of packets at most δ apart), not from its last
      packet (:func:`~tacit.response_latency.gaps.next_gap`).
    - ``mode_floor_ratio``: the centre-tracking histogram's floor per connection, instead of the
      fixed δ: this ratio times the centre of the mode holding the most of the epoch's time, the
      causal-pair mode at any scale (sub-ms on loopback); the connection's δ for bursts follows
      it from its first closed epoch on. 0: the fixed δ. Chosen: 0.5, a factor-2 valley below
      the dominant mode: the latency of a connection moves by less than that within an epoch,
      and the short gaps of a pipeline, spread thinly below the mode, stay out
      (bench/bench_response.py and bench_web_experiment.py score it).

    Why off by default: on pipelining clients (the simulator, the live web experiment) they cut
    the error, but where clients pause to think between requests the pauses can hold more of an
    epoch's time than the waits for responses, the floor then rises above the responses, and
    the estimates come out far too high (bench/bench_loadbalancer.py shows it on the
    load-balancer simulation). A workload decides.

    Timers (gaps that match them are not response latencies):

    - ``tcp_initial_rto_ns`` 1 s (RFC 6298 §2.1); ``tcp_min_rto_ns`` 200 ms — RFC 6298 §2.4
      says 1 s, but Linux (``TCP_RTO_MIN``) and most stacks use 200 ms, and a 1 s floor is
      covered by the initial RTO; both doubled up to ``max_backoffs`` times (§5.5).
    - ``quic_initial_rtt_ns`` 333 ms (kInitialRtt, RFC 9002 §6.2.2): before any RTT sample the
      PTO is ``kInitialRtt + 4 · kInitialRtt/2`` (+ ``quic_max_ack_delay_ns``, 25 ms,
      RFC 9000 §18.2, for application data), doubled on each expiry (RFC 9002 §6.2.1).
    - ``timer_tolerance``: relative distance within which a mode centre matches a timer value.
      Chosen: 5 %.
    - ``remove_timer_modes``: drop Algorithm 2 modes that match a timer value. A TCP gap that
      spans a retransmission the capture shows is dropped in any case.
    - ``idle_gap_ns``: gaps at least this long are idle periods, not responses. Chosen: 30 s,
      the usual QUIC ``max_idle_timeout`` (RFC 9000 §10.1 leaves it to the endpoints) and
      longer than any RTO backoff that still matters.
    """

    gap_threshold_ns: int = 1 * MS
    max_modes: int = 10
    mode_epsilon_ns: int = 100 * US
    mode_epsilon_ratio: float = 0.25
    ibg_min_share: float = 0.05
    ibg_spread_ratio: float = 0.5
    ibg_min_time_share: float = 0.25
    merge_epsilon: float = 0.25
    epoch_ns: int = 100 * MS
    coalesce_acks: bool = True
    udp_ack_max_payload: int = 64
    batch_end_only: bool = True
    min_full_payload: int = 1200
    tcp_initial_rto_ns: int = 1 * SECOND
    tcp_min_rto_ns: int = 200 * MS
    quic_initial_rtt_ns: int = 333 * MS
    quic_max_ack_delay_ns: int = 25 * MS
    max_backoffs: int = 6
    timer_tolerance: float = 0.05
    remove_timer_modes: bool = True
    idle_gap_ns: int = 30 * SECOND
    from_burst_start: bool = False
    mode_floor_ratio: float = 0.0

    @classmethod
    def published(cls, **overrides) -> PirateParams:
        """Algorithm 2 as the paper gives it: a fixed ε, and the largest mode alone is the IBG
        (tacit's four changes to it off: ``mode_epsilon_ratio``, ``ibg_min_share``,
        ``ibg_spread_ratio``, ``ibg_min_time_share``)."""
        base = {
            "mode_epsilon_ratio": 0.0,
            "ibg_min_share": 0.0,
            "ibg_spread_ratio": 0.0,
            "ibg_min_time_share": 0.0,
        }
        return cls(**{**base, **overrides})

    @classmethod
    def pipelining(cls, **overrides) -> PirateParams:
        """The parameters for clients that pipeline requests (both changes above on)."""
        return cls(**{"from_burst_start": True, "mode_floor_ratio": 0.5, **overrides})

    def __post_init__(self) -> None:  # noqa: C901
        # The compiled estimator is typed by its arguments: a ratio given as the integer 0
        # would compile it a second time, for seconds.
        for f in fields(self):
            if f.type == "float":
                value = getattr(self, f.name)
                try:
                    object.__setattr__(self, f.name, float(value))
                except (TypeError, ValueError):
                    raise ConfigError(f"{f.name} must be a number, got {value!r}") from None
        if self.gap_threshold_ns <= 0 or self.epoch_ns <= 0 or self.idle_gap_ns <= 0:
            raise ConfigError("gap threshold, epoch and idle gap must be positive")
        if not 1 <= self.max_modes <= 255:
            raise ConfigError(f"max_modes must be within 1..255, got {self.max_modes}")
        if not 0 < self.merge_epsilon < 1 or not 0 <= self.timer_tolerance < 1:
            raise ConfigError("merge_epsilon must be in (0, 1) and timer_tolerance in [0, 1)")
        if not 0 <= self.mode_floor_ratio < 1:
            raise ConfigError(f"mode_floor_ratio must be in [0, 1), got {self.mode_floor_ratio}")
        if self.mode_epsilon_ns < 0 or not 0 <= self.mode_epsilon_ratio < 1:
            raise ConfigError("mode_epsilon_ns must be ≥ 0 and mode_epsilon_ratio in [0, 1)")
        shares = (self.ibg_min_share, self.ibg_spread_ratio, self.ibg_min_time_share)
        if not all(0 <= x < 1 for x in shares):
            raise ConfigError(
                "ibg_min_share, ibg_spread_ratio and ibg_min_time_share must be in [0, 1)"
            )
        if self.max_backoffs < 0 or self.udp_ack_max_payload < 0 or self.min_full_payload < 1:
            raise ConfigError("max_backoffs, udp_ack_max_payload, min_full_payload out of range")
