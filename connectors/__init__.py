"""rankflow: connectors."""
