"""rankflow: operators."""
