"""Rill benchmark suite: `python -m bench` (see docs/PERFORMANCE.md, section "Suite")."""
