"""Clients and model makers that both the tests (tests/) and the benchmarks (bench/) use: an
HTTP/2 client that sends what grpcio would not, HTTP/2 flood patterns, hostile Python models
and a fake HTTP transport. Neither tests/ nor bench/ imports the other; both import this."""
