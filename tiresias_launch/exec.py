"""``python -m tiresias_launch.exec script.py args…``: run a training script preemptibly.

Installs the preemption signal handlers before anything slow is imported, says at start when
the script has nothing checkpointable (then the signals keep their default action), hosts or
awaits the Horovod rendezvous, patches Keras ``fit`` and Lightning ``Trainer.fit`` (unmodified
scripts become preemptible), then runs the script as ``__main__``.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
import traceback
from pathlib import Path

from tiresias_launch import keras, lightning
from tiresias_launch.checkpointable import why_not
from tiresias_launch.env import EnvError
from tiresias_launch.imports import patch_on_import
from tiresias_launch.runtime import Runtime, get_runtime

USAGE = "usage: python -m tiresias_launch.exec script.py [args…]"
LEGACY_KERAS = "TF_USE_LEGACY_KERAS"


def legacy_keras_for_gangs(rt: Runtime) -> None:
    """A multi-worker parameter-server or MultiWorkerMirrored job gets legacy Keras
    (``tf.keras`` is tf_keras) unless its environment chose: Keras 3 ``fit`` cannot run under
    those strategies. The chief says so once, in its log, when tf_keras is imported. An
    elastic job gets it at every world, one worker included: its checkpoints are tf_keras's."""
    workers = max(rt.env.num_workers, rt.env.max_workers or 0)
    if rt.env.mode == "horovod" or workers + rt.env.num_ps < 2:
        return
    if LEGACY_KERAS in os.environ or importlib.util.find_spec("tf_keras") is None:
        return
    os.environ[LEGACY_KERAS] = "1"
    if rt.env.is_chief:
        patch_on_import(
            {
                "tf_keras": lambda _: rt.say(
                    f"a multi-worker job: tf.keras is legacy Keras ({LEGACY_KERAS}=1), as "
                    f"Keras 3 fit cannot run under its strategy; set {LEGACY_KERAS}=0 to keep "
                    "Keras 3"
                )
            }
        )


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
    why = why_not(Path(script))
    if rt.env.mode == "horovod":
        from tiresias_launch import gloo, horovod_elastic

        horovod_elastic.install(rt, why)
        try:
            gloo.prepare()
        except ImportError as e:
            print(
                f"tiresias_launch.exec: horovod mode needs Horovod with Gloo: {e}", file=sys.stderr
            )
            return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # TF's C++ INFO lines: not in logs
    legacy_keras_for_gangs(rt)
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
