"""Load TensorFlow once, without its start-up log lines in notebook output."""

from __future__ import annotations

import functools
import os
import sys
import tempfile


@functools.lru_cache(maxsize=None)
def tensorflow():
    """Return the `tensorflow` module, imported with its C++ start-up chatter held back.

    TensorFlow 2.21 prints absl/oneDNN info lines on file descriptor 2 while it loads, whatever
    TF_CPP_MIN_LOG_LEVEL (set in gpubench/__init__.py) says: they are dropped, unless the import
    fails; then they are printed with the error.
    """
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    sys.stderr.flush()
    with tempfile.TemporaryFile() as captured:
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow as tf  # noqa: PLC0415 - deliberately lazy
            import keras  # noqa: F401,PLC0415 - loads with the same quiet stderr
        except BaseException:
            os.dup2(saved, 2)
            captured.seek(0)
            sys.stderr.write(captured.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    tf.get_logger().setLevel("ERROR")  # AutoGraph and retracing warnings
    return tf
