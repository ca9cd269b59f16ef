"""``rankflow bench``: rankflow against the seed's first design, side by side."""
