"""Helpers shared by the unit, integration and end-to-end tests (tests never import each other)."""
