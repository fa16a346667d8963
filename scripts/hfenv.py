"""Find the Python that has Hugging Face transformers (scripts/setup.sh puts it in a venv over
Debian's torch, WEIPIPE_HF_VENV, default /opt/weipipe-hf).

A test or script that needs transformers (or `tokenizers`) calls `hfenv.use_transformers()`
(`hfenv.use("tokenizers")`) before importing it: when the running interpreter lacks the module
and the venv has an interpreter, the script is run again
under the venv's interpreter (once: WEIPIPE_HF_REEXEC guards the loop). Otherwise nothing
happens and the caller's own ImportError handling (skip 77) applies.
"""
import os
import sys


def use_transformers():
    use("transformers")


def use(module):
    try:
        __import__(module)
        return
    except ImportError:
        pass
    if os.environ.get("WEIPIPE_HF_REEXEC"):
        return
    venv = os.environ.get("WEIPIPE_HF_VENV", "/opt/weipipe-hf")
    py = os.path.join(venv, "bin", "python")
    if not os.access(py, os.X_OK):
        return
    os.environ["WEIPIPE_HF_REEXEC"] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(py, [py, os.path.abspath(sys.argv[0])] + sys.argv[1:])
