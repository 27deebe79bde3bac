"""The tacit command line."""
