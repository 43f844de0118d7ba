"""Helpers shared by the course notebooks: data, models, launching workers, checks."""
import os

# Quiet TensorFlow's start-up chatter (C++ INFO and WARNING lines) in notebooks and their workers;
# errors still show. Set TF_CPP_MIN_LOG_LEVEL=0 before importing utils to see everything.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
