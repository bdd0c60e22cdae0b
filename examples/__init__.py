"""The example scripts, installed as ``circuitgrad.examples``: each trains a model when run
(``python examples/iris.py``), and the ones that define ``model()`` are model files that the command
line also finds by their short name (``circuitgrad zk prove iris``, ``circuitgrad cost tinygpt``;
see :func:`circuitgrad.modelfile.resolve`)."""
