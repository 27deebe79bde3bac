"""Reading device syslogs: RFC 5424, RFC 3164, the loghub formats; errors and accounting."""

from __future__ import annotations

import csv
from datetime import UTC, datetime

import numpy as np
import pytest

from tacit.errors import InputError
from tacit.formats.syslog import (
    format_rfc5424,
    parse_syslog_text,
    read_loghub_truth,
    read_rpc_csv,
    read_syslog,
)

S = 1_000_000_000
LOGHUB = ("BGL", "HPC", "Linux", "OpenSSH", "Thunderbird")


def ns(*args: int) -> int:
    return int(datetime(*args, tzinfo=UTC).timestamp()) * S


def test_rfc5424_round_trip():
    times = [ns(2024, 3, 1, 12, 0, 0) + 123_456_000, ns(2024, 3, 1, 12, 0, 5)]
    text = "\n".join(
        [
            format_rfc5424(times[0], "sw1", "switchd", "link down on Gi1/0/1"),
            format_rfc5424(times[1], "sw2", "switchd", "hello  world"),
        ]
    )
    r = parse_syslog_text(text)
    assert r.formats == {"<text>": "rfc5424"}
    assert r.records.time.tolist() == times
    assert r.records.device_names().tolist() == ["sw1", "sw2"]
    assert r.records.content == ["link down on Gi1/0/1", "hello  world"]
    assert r.accounting == {"lines": 2, "parsed": 2, "blank": 0, "unparsed": 0}


def test_rfc5424_offset_and_structured_data():
    line = '<34>1 2003-10-11T22:14:15.003-07:00 host.example su 77 ID47 [a@1 x="]"] BOM msg'
    line = line.replace('"]"', '"\\]"')
    r = parse_syslog_text(line)
    assert r.records.time[0] == ns(2003, 10, 12, 5, 14, 15) + 3_000_000
    assert r.records.content == ["BOM msg"]
    assert r.records.app == ["su"]


def test_rfc3164_with_and_without_priority():
    text = (
        "<13>Feb 29 01:02:03 core1 sshd[42]: Accepted password\n"
        "\n"
        "Mar  1 01:02:04 core2 kernel: eth0 up \n"
    )
    r = parse_syslog_text(text, year=2004)
    assert r.formats["<text>"] == "rfc3164"
    assert r.records.time.tolist() == [ns(2004, 2, 29, 1, 2, 3), ns(2004, 3, 1, 1, 2, 4)]
    assert r.records.content == ["Accepted password", "eth0 up"]
    assert r.records.app == ["sshd", "kernel"]
    assert r.records.line.tolist() == [1, 3]
    assert r.accounting["blank"] == 1


def test_unknown_format_names_first_line():
    with pytest.raises(InputError) as e:
        parse_syslog_text("\n\nthis is not syslog\nneither is this\n", source="x.log")
    assert e.value.path == "x.log" and e.value.record == "line 3"
    assert "unknown syslog format" in str(e.value)


def test_unparsed_lines_counted_or_raised(tmp_path):
    good = format_rfc5424(5 * S, "sw1", "d", "ok")
    text = "\n".join([good, "garbage", good, "<13>1 not-a-time sw1 d - - - bad time", good])
    path = tmp_path / "mixed.log"
    path.write_text(text)
    r = read_syslog(path)
    assert r.accounting == {"lines": 5, "parsed": 3, "blank": 0, "unparsed": 2}
    assert r.unparsed_lines == [f"{path}:2", f"{path}:4"]
    assert len(r.records) == 3
    with pytest.raises(InputError) as e:
        read_syslog(path, errors="raise")
    assert e.value.record == "line 2"


def test_bad_calendar_date_is_counted():
    r = parse_syslog_text("Jan  1 00:00:00 a x: ok\nFeb 30 00:00:00 a x: no\n", year=2001)
    assert r.accounting["unparsed"] == 1 and r.records.content == ["ok"]


def test_rpc_csv(tmp_path):
    p = tmp_path / "rpcs.csv"
    p.write_text("time_ns,src,dst,one_way_ns,end_to_end_ns\n1,a,b,10,100\n\n2,b,a,11,90\n")
    r = read_rpc_csv(p)
    assert r.time.tolist() == [1, 2] and r.src.tolist() == ["a", "b"]
    assert r.end_to_end_ns.tolist() == [100, 90]
    p.write_text("time_ns,src,dst,one_way_ns,end_to_end_ns\n1,a,b,x,100\n")
    with pytest.raises(InputError, match="line 2"):
        read_rpc_csv(p)
    p.write_text("time_ns,src\n1,a\n")
    with pytest.raises(InputError, match="one_way_ns"):
        read_rpc_csv(p)
    p.write_text(f"time_ns,src,dst,one_way_ns,end_to_end_ns\n{2**63},a,b,10,100\n")
    with pytest.raises(InputError, match=r"line 2: bad RPC row \(a time beyond int64"):
        read_rpc_csv(p)


@pytest.mark.parametrize("name", LOGHUB)
def test_loghub_samples_match_their_structured_content(shared_data, name):
    d = shared_data / "logs" / "loghub" / name
    r = read_syslog(d / f"{name}_2k.log")
    with open(d / f"{name}_2k.log_structured.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert r.accounting["unparsed"] == 0 and len(r.records) == len(rows)
    assert r.records.content == [row["Content"].strip() for row in rows]
    assert (np.diff(r.records.line) == 1).all()
    truth = read_loghub_truth(d / f"{name}_2k.log_structured.csv", r.records.line)
    assert truth.tolist() == [row["EventId"] for row in rows]


def test_a_csv_the_csv_module_cannot_parse_names_its_line(tmp_path):
    p = tmp_path / "rpcs.csv"
    huge = "x" * 200_000  # past the csv module's field size limit
    p.write_text(f"time_ns,src,dst,one_way_ns,end_to_end_ns\n1,a,b,10,100\n2,b,{huge},11,90\n")
    with pytest.raises(InputError, match=r"rpcs\.csv: record line 3: malformed CSV: "):
        read_rpc_csv(p)
