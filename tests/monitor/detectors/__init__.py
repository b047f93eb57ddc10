"""Detector tests: synthetic fire/silent cases, real runs, incremental mode."""
