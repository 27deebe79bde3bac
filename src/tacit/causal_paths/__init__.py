"""Black-box causal path analysis (WAP5, Reynolds et al., WWW '06): message linking, path patterns,
node and network delays, clock offsets and timelines."""
