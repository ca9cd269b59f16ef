"""rankflow: real-time top-K rankings from event streams."""
