"""Capture room: tcp (see nbmq.capture)."""
