"""Live experiments on this machine that measure tacit against ground truth: Pirate's web and
memcached experiment on loopback, and RDA's two agents across a network-namespace link."""
