"""Helpers shared by the course notebooks: data, models, launching workers, checks."""
