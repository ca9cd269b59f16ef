"""rankflow: state."""
