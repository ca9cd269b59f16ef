"""rankflow's HTTP service: event ingest for players, rankings for readers."""
