"""The bundled offline models as clean framework embedders, for examples, tests and demos.

One module per framework (:mod:`.langchain`, :mod:`.llama_index`, :mod:`.chroma`),
each importing only its own framework. The watermarking wrappers re-export these
classes lazily under their old names and never import a bundled model themselves;
importing this package imports no framework.
"""
