"""The benchmarks: each product's flow against the seed's design it replaced, side by side.

Installed as ``rankflow.bench`` from the top-level ``bench/`` folder, beside the runtime:
``rankflow`` itself never imports it (its ``bench*`` commands do, when they run). One
shared rig (``rig.py``), one module or package per product (``listeners.py``,
``boards/``, ``activity/``) and the seed designs they are measured against
(``baseline.py``, ``boards_baseline.py``, ``activity_baseline.py``).
"""
