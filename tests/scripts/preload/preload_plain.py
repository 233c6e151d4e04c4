"""A harmless module to preload; records that it was imported."""

IMPORTED = True
