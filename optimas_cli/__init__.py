"""optimas: optimize compound AI systems with globally aligned local reward functions."""
