"""A pattern as text: an indented tree, with a chain that repeats a unit of hops (a client
whose every request follows the last response) shown once with its count."""

from __future__ import annotations

from tacit.causal_paths.patterns import Hop, Pattern


def hop(position: int, parent: int, src: str, dst: str) -> Hop:
    return Hop(position, parent, src, dst, True, True, 1e6, 2e5)


def test_a_repeated_chain_is_one_line_with_its_count() -> None:
    hops = [hop(0, -1, "client", "web")]
    for k in range(1, 401):  # web answers, the client asks again: 400 more hops in a chain
        hops.append(hop(k, k - 1, *(("web", "client") if k % 2 else ("client", "web"))))
    hops += [hop(401, 400, "web", "db"), hop(402, 400, "web", "cache")]
    text = Pattern(1, 5, 5.0, 1.0, None, hops).text_tree().splitlines()
    assert text == [
        "(client -> web, web -> client) × 200",
        "  client -> web  [1.000 ms at client]  net 0.200 ms",
        "    web -> db  [1.000 ms at web]  net 0.200 ms",
        "    web -> cache  [1.000 ms at web]  net 0.200 ms",
    ]


def test_a_tree_without_repeats_is_indented_per_hop() -> None:
    hops = [hop(0, -1, "client", "web"), hop(1, 0, "web", "db"), hop(2, 1, "db", "disk")]
    text = Pattern(1, 1, 1.0, 1.0, None, hops).text_tree().splitlines()
    assert [line.split("  [")[0] for line in text] == [
        "client -> web",
        "  web -> db",
        "    db -> disk",
    ]
