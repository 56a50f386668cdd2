"""Capture room: datagrams (see nbmq.capture)."""
