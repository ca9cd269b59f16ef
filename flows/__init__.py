"""rankflow: flows."""
