"""Reading device syslogs: RFC 5424, RFC 3339, RFC 3164 and its year, user line formats, the
loghub formats; errors and accounting."""

from __future__ import annotations

import csv
import os
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import numpy as np
import pytest

from tacit.errors import ConfigError, InputError
from tacit.formats.syslog import (
    MONTHS,
    format_rfc5424,
    line_format,
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
    assert r.unparsed_lines == [
        f"{path}:2: not a rfc5424 line: 'garbage'",
        f"{path}:4: bad timestamp (not an RFC 3339 time: 'not-a-time'): "
        "'<13>1 not-a-time sw1 d - - - bad time'",
    ]
    assert len(r.records) == 3
    with pytest.raises(InputError) as e:
        read_syslog(path, errors="raise")
    assert str(e.value) == f"{path}: record line 2: not a rfc5424 line: 'garbage'"


@pytest.mark.parametrize(
    "line", [format_rfc5424(5 * S, "sw1", "d", "ok"), "Jun 14 15:16:01 h p: x"]
)
def test_a_utf8_byte_order_mark_keeps_the_first_line(tmp_path, line):
    path = tmp_path / "bom.log"
    path.write_bytes(b"\xef\xbb\xbf" + f"{line}\n{line}\n".encode())
    r = read_syslog(path)
    assert r.accounting == {"lines": 2, "parsed": 2, "blank": 0, "unparsed": 0}


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


def test_rfc3339_lines_as_rsyslog_writes_them():
    text = (
        "2024-05-01T12:34:56.123456+00:00 web1 nginx[812]: GET / 200\n"
        "2024-05-01T14:34:56.5+02:00 web1 cron[9]: job done\n"
        "2024-05-01T12:34:56Z web2 kernel: eth0 up\n"
        "2024-05-01T08:04:56.123456789-04:30 web2 app: nanoseconds kept\n"
        "2024-05-01T12:34:56.1234567891z web2 app: tenth digit dropped\n"
    )
    r = parse_syslog_text(text)
    base = ns(2024, 5, 1, 12, 34, 56)
    assert r.formats == {"<text>": "rfc3339"}
    assert r.records.time.tolist() == [
        base + 123_456_000,
        base + 500_000_000,
        base,
        base + 123_456_789,
        base + 123_456_789,
    ]
    assert r.records.device_names().tolist() == ["web1", "web1", "web2", "web2", "web2"]
    assert r.records.app == ["nginx", "cron", "kernel", "app", "app"]
    assert r.records.content[:2] == ["GET / 200", "job done"]
    assert r.years == {}


def test_offsets_across_daylight_saving_changes():
    """New York's clocks: 01:59:59.999999 EST is one microsecond before 03:00 EDT (spring);
    01:30 EDT and 01:30 EST are an hour apart (autumn)."""
    ny = ZoneInfo("America/New_York")
    stamps = [
        "2024-03-10T01:59:59.999999-05:00",
        "2024-03-10T03:00:00-04:00",
        "2024-11-03T01:30:00-04:00",
        "2024-11-03T01:30:00-05:00",
    ]
    text = "".join(f"<13>1 {t} sw1 d - - - m\n" for t in stamps)
    got = parse_syslog_text(text).records.time.tolist()
    local = [
        datetime(2024, 3, 10, 1, 59, 59, 999_999, tzinfo=ny),
        datetime(2024, 3, 10, 3, 0, 0, tzinfo=ny),
        datetime(2024, 11, 3, 1, 30, tzinfo=ny, fold=0),
        datetime(2024, 11, 3, 1, 30, tzinfo=ny, fold=1),
    ]
    assert got == [int(t.timestamp()) * S + t.microsecond * 1000 for t in local]
    assert got[1] - got[0] == 1_000 and got[3] - got[2] == 3600 * S


def test_rfc3339_leap_day_and_what_is_not_a_time():
    text = (
        "2024-02-29T23:59:59.75Z h a: leap day\n"
        "2023-02-29T00:00:00Z h a: no such day\n"
        "2016-12-31T23:59:60Z h a: leap second\n"
        "2024-05-01T12:34:56 h a: no offset\n"
        "2024-05-01T12:34:56+24:00 h a: no such offset\n"
    )
    r = parse_syslog_text(text)
    assert r.records.time.tolist() == [ns(2024, 2, 29, 23, 59, 59) + 750_000_000]
    assert r.accounting == {"lines": 5, "parsed": 1, "blank": 0, "unparsed": 4}
    reasons = [u.split(": ", 1)[1] for u in r.unparsed_lines]
    assert reasons[0].startswith("bad timestamp (day is out of range for month)")
    assert reasons[1].startswith("bad timestamp (second must be in 0..59)")
    assert reasons[2].startswith("bad timestamp (no UTC offset: '2024-05-01T12:34:56')")
    assert reasons[3].startswith("bad timestamp (bad UTC offset")


def test_rfc5424_fractions_and_zulu():
    text = (
        "<165>1 2024-05-01T12:34:56.000001Z r1 bgpd 4242 NBR - peer down\n"
        '<165>1 2024-05-01T18:04:56.123456789+05:30 r2 bgpd - - [x@1 a="b"] up\n'
    )
    r = parse_syslog_text(text)
    base = ns(2024, 5, 1, 12, 34, 56)
    assert r.records.time.tolist() == [base + 1_000, base + 123_456_789]
    assert r.records.content == ["peer down", "up"]


def write_log(tmp_path, name: str, text: str, modified: datetime):
    path = tmp_path / name
    path.write_text(text)
    stamp = modified.timestamp()
    os.utime(path, (stamp, stamp))
    return path


def test_rfc3164_year_from_modification_time_with_new_year_inside(tmp_path):
    text = (
        "Nov 30 10:00:00 core1 sshd[1]: a\n"
        "Dec 31 23:59:59 core1 sshd[1]: b\n"
        "Dec 31 23:59:58 core1 sshd[1]: out of order, same year\n"
        "Jan  1 00:00:01 core1 sshd[1]: c\n"
    )
    path = write_log(tmp_path, "new-year.log", text, datetime(2025, 1, 2, tzinfo=UTC))
    r = read_syslog(path)
    assert r.records.time.tolist() == [
        ns(2024, 11, 30, 10, 0, 0),
        ns(2024, 12, 31, 23, 59, 59),
        ns(2024, 12, 31, 23, 59, 58),
        ns(2025, 1, 1, 0, 0, 1),
    ]
    assert r.years == {
        str(path): "2024-2025 (from the file's modification time, 2025-01-02; a new year at line 4)"
    }
    given = read_syslog(path, year=2019)
    assert given.records.time[0] == ns(2019, 11, 30, 10, 0, 0)
    assert given.records.time[-1] == ns(2020, 1, 1, 0, 0, 1)
    assert given.years == {str(path): "2019-2020 (given; a new year at line 4)"}


def test_rfc3164_month_after_the_modification_month_is_last_year(tmp_path):
    path = write_log(
        tmp_path,
        "late.log",
        "Dec 24 18:00:00 core1 cron[2]: x\n",
        datetime(2025, 3, 1, 12, tzinfo=UTC),
    )
    r = read_syslog(path)
    assert r.records.time.tolist() == [ns(2024, 12, 24, 18, 0, 0)]
    assert r.years == {str(path): "2024 (from the file's modification time, 2025-03-01)"}


def test_rfc3164_leap_day_depends_on_the_year(tmp_path):
    text = "Feb 29 01:02:03 core1 kernel: leap\nMar  1 00:00:00 core1 kernel: after\n"
    leap = write_log(tmp_path, "leap.log", text, datetime(2024, 3, 2, tzinfo=UTC))
    r = read_syslog(leap)
    assert r.records.time.tolist() == [ns(2024, 2, 29, 1, 2, 3), ns(2024, 3, 1, 0, 0, 0)]
    common = write_log(tmp_path, "common.log", text, datetime(2025, 3, 2, tzinfo=UTC))
    r = read_syslog(common)
    assert r.records.time.tolist() == [ns(2025, 3, 1, 0, 0, 0)]
    assert r.accounting == {"lines": 2, "parsed": 1, "blank": 0, "unparsed": 1}
    assert r.unparsed_lines == [f"{common}:1: bad timestamp (no Feb 29 in 2025)"]


def test_rfc3164_text_without_a_year_is_an_error():
    with pytest.raises(InputError) as e:
        parse_syslog_text("\nMay  1 12:34:56 host app[7]: msg\n", source="mem")
    assert e.value.path == "mem" and e.value.record == "line 2"
    assert "no year given" in str(e.value)


def test_user_line_format_with_strptime_and_offset():
    fmt = line_format(
        r"(?P<time>\S+ \S+ [+-]\d{4}) \[(?P<host>[^\]]+)\] (?P<app>\w+)\((?P<pid>\d+)\) "
        r"(?P<message>.*)",
        "%Y-%m-%d %H:%M:%S,%f %z",
    )
    text = (
        "2024-05-01 14:34:56,250 +0200 [db1] postgres(77) checkpoint starting\n"
        "2024-05-01 12:34:57,000 +0000 [db1] postgres(77) checkpoint complete\n"
        "May 1 12:34:58 db1 postgres: another format\n"
    )
    r = parse_syslog_text(text, fmt)
    base = ns(2024, 5, 1, 12, 34, 56)
    assert r.formats == {"<text>": "custom"}
    assert r.records.time.tolist() == [base + 250_000_000, base + S]
    assert r.records.device_names().tolist() == ["db1", "db1"]
    assert r.records.app == ["postgres", "postgres"]
    assert r.records.content == ["checkpoint starting", "checkpoint complete"]
    assert r.unparsed_lines == [
        "<text>:3: not a custom line: 'May 1 12:34:58 db1 postgres: another format'"
    ]


@pytest.mark.parametrize(
    ("time_format", "stamp"),
    [
        ("epoch", "1714566896.25"),
        ("epoch_ms", "1714566896250"),
        ("iso", "2024-05-01T12:34:56.250"),
        ("iso", "2024-05-01 14:34:56,25+02:00"),
    ],
)
def test_user_line_format_named_times(time_format, stamp):
    fmt = line_format(r"(?P<time>\S+(?: \S+)?) \| (?P<message>.*)", time_format)
    r = parse_syslog_text(f"{stamp} | hello\n", fmt)
    assert r.records.time.tolist() == [ns(2024, 5, 1, 12, 34, 56) + 250_000_000]
    assert r.records.device_names().tolist() == ["-"] and r.records.app == [""]


def test_user_line_format_without_year_is_dated_like_rfc3164():
    fmt = line_format(r"(?P<time>\d\d/\w{3} [\d:]+) (?P<message>.*)", "%d/%b %H:%M:%S")
    r = parse_syslog_text("29/Feb 23:00:00 leap\n01/Mar 00:00:00 next\n", fmt, year=2024)
    assert r.records.time.tolist() == [ns(2024, 2, 29, 23, 0, 0), ns(2024, 3, 1, 0, 0, 0)]
    assert r.years == {"<text>": "2024 (given)"}


@pytest.mark.parametrize(
    ("regex", "time_format", "says"),
    [
        (r"(?P<time>\S+", "iso", "is not a regular expression"),
        (r"(?P<time>\S+) (?P<msg>.*)", "iso", "no (?P<message>...) group"),
        (r"(?P<time>\S+) (?P<level>\w+) (?P<message>.*)", "iso", "unknown group 'level'"),
        (r"(?P<time>\S+) (?P<message>.*)", "%H:%M:%S", "has no year and no month"),
        (r"(?P<time>\S+) (?P<message>.*)", "%Y-%Q", "nor a strptime format"),
    ],
)
def test_user_line_format_mistakes_are_config_errors(regex, time_format, says):
    with pytest.raises(ConfigError) as e:
        line_format(regex, time_format)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_loghub_times_match_their_structured_columns(shared_data):
    """With the year the loghub samples were always read in (2000), every time is what the
    structured CSV's time columns say: the readers changed nothing on these files."""
    root = shared_data / "logs" / "loghub"

    def rows(name):
        with open(root / name / f"{name}_2k.log_structured.csv", encoding="utf-8") as f:
            return list(csv.DictReader(f))

    def month_day(mon, day, hms):
        return ns(2000, MONTHS[mon], int(day), *map(int, hms.split(":")))

    expected = {
        "BGL": [
            int(
                datetime.strptime(x["Time"], "%Y-%m-%d-%H.%M.%S.%f").replace(tzinfo=UTC).timestamp()
            )
            * S
            + int(x["Time"][-6:]) * 1000
            for x in rows("BGL")
        ],
        "HPC": [int(x["Time"]) * S for x in rows("HPC")],
        "Thunderbird": [int(x["Timestamp"]) * S for x in rows("Thunderbird")],
        "Linux": [month_day(x["Month"], x["Date"], x["Time"]) for x in rows("Linux")],
        "OpenSSH": [month_day(x["Date"], x["Day"], x["Time"]) for x in rows("OpenSSH")],
    }
    for name, times in expected.items():
        r = read_syslog(root / name / f"{name}_2k.log", year=2000)
        assert r.accounting == {"lines": 2000, "parsed": 2000, "blank": 0, "unparsed": 0}
        assert r.records.time.tolist() == times, name


def test_loghub_openssh_dated_by_its_modification_time(shared_data, tmp_path):
    text = (shared_data / "logs" / "loghub" / "OpenSSH" / "OpenSSH_2k.log").read_text()
    path = write_log(tmp_path, "OpenSSH_2k.log", text, datetime(2006, 1, 5, tzinfo=UTC))
    r = read_syslog(path)
    in_2000 = parse_syslog_text(text, year=2000).records.time
    shift = ns(2005, 12, 10) - ns(2000, 12, 10)
    assert (r.records.time - in_2000 == shift).all() and len(r.records) == 2000
    assert r.years == {str(path): "2005 (from the file's modification time, 2006-01-05)"}
