"""The watch service: follows runs in the store, detects incrementally, and raises alerts."""
