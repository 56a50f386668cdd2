"""Capture room: files (see nbmq.capture)."""
