"""Helpers shared by the tests of several areas (inputs, components, models)."""
