"""A small ``ss -tin`` capture (two samples of one server's connections, one lossy and slow),
for the TCP diagnosis tests and the fuzz seeds."""

SS = """1000.0
State Recv-Q Send-Q Local Address:Port Peer Address:Port
ESTAB 0 0 10.0.0.1:443 198.51.100.7:5000
\t cubic rto:300 rtt:80/10 minrtt:40 cwnd:10 retrans:0/1
1000.5
State Recv-Q Send-Q Local Address:Port Peer Address:Port
ESTAB 0 0 10.0.0.1:443 198.51.100.7:5000
\t cubic rto:600 rtt:120/30 minrtt:40 cwnd:5 retrans:1/3
ESTAB 0 0 10.0.0.1:443 198.51.100.8:6000
\t cubic rto:204 rtt:2/1 minrtt:1.5 cwnd:10
"""
