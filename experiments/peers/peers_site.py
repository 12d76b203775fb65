"""Puts the peer libraries installed by experiments/peers/install.sh first on
sys.path: $PEERS_SITE (default /tmp/peers/site-packages) and the CuTe DSL's
dsl_packages folder inside it (which the DSL's .pth file would add, but Python
reads .pth files only in site directories, not in folders named by PYTHONPATH
or sys.path). Call activate() before importing a peer."""
import os
import sys

DEFAULT = "/tmp/peers/site-packages"


def activate():
    """The site folder put on sys.path, or None when it does not exist (the
    peers then import from wherever the interpreter finds them, if anywhere)."""
    site = os.environ.get("PEERS_SITE", DEFAULT)
    if not os.path.isdir(site):
        return None
    for p in reversed([site, os.path.join(site, "nvidia_cutlass_dsl", "dsl_packages")]):
        if p not in sys.path:
            sys.path.insert(0, p)
    return site
