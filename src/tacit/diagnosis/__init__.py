"""End-to-end diagnosis of slow requests (YTrace: "End-to-end Performance Diagnosis in Large
Cloud and Content Providers"): detection, critical-path localization, subset queries (the slowest
requests, A/B tests; TraceWeaver §6.4), network syslog causality, and root-cause rules."""
