"""``python -m tiresias_launch.exec script.py args…``: run a training script preemptibly.

Installs the preemption signal handlers before anything slow is imported, says at start when
the script has nothing checkpointable (then the signals keep their default action), hosts or
awaits the Horovod rendezvous, patches Keras ``fit`` and Lightning ``Trainer.fit`` (unmodified
scripts become preemptible), then runs the script as ``__main__``.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from pathlib import Path

from tiresias_launch import keras, lightning
from tiresias_launch.checkpointable import why_not
from tiresias_launch.env import EnvError
from tiresias_launch.runtime import get_runtime

USAGE = "usage: python -m tiresias_launch.exec script.py [args…]"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(USAGE, file=sys.stderr)
        return 2
    script = argv[0]
    if not os.path.isfile(script):
        print(f"tiresias_launch.exec: no such script: {script}", file=sys.stderr)
        return 2
    sys.argv = list(argv)  # the script's name is the default job id in pass-through mode
    try:
        rt = get_runtime()
    except EnvError as e:
        print(f"tiresias_launch.exec: bad environment: {e}", file=sys.stderr)
        return 2
    if rt.env.mode == "horovod":
        from tiresias_launch import gloo

        try:
            gloo.prepare()
        except ImportError as e:
            print(
                f"tiresias_launch.exec: horovod mode needs Horovod with Gloo: {e}", file=sys.stderr
            )
            return 2
    why = why_not(Path(script))
    if why is not None:
        rt.cannot_checkpoint(why)
    keras.install()
    lightning.install()
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    rt.exit(code)


if __name__ == "__main__":
    sys.exit(main())
