"""Tracking: asv runs, the results frame, sign-off and change points."""
