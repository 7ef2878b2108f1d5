"""Two models trained one after the other with ``fit`` (no tiresias import).

argv: ORDER, where ORDER "ab" trains model "a" then "b" and "ba" the other way round: a
script whose fit calls do not repeat in the same order after a restart.
"""

import sys

import keras
import numpy as np

keras.utils.set_random_seed(0)
x = np.random.normal(size=(64, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
models = {}
for name in "ab":
    models[name] = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)], name=name)
    models[name].compile("sgd", "mse")
for name in sys.argv[1]:
    models[name].fit(x, y, batch_size=8, epochs=2, verbose=0)
print("done")
