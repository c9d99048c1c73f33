"""The Pallas-like tracing front end: Python functions over refs and arrays become IR.

- ``scopes``: regions under construction and closure conversion between them;
- ``promotion``: dtypes of mixed operations (jax.numpy's rules);
- ``indexing``: Python indices to IR indexers;
- ``values``: ``TracedArray`` and the array operations behind its operators;
- ``refs``: ``TracedRef``, ``ds``, ``load``, ``store``, ``addupdate`` and ref views;
- ``control``: ``run_scoped``, loops, conditionals, ``call``, ``program_id``;
- ``tracing``: ``trace``, which turns a function into an IR ``Function``.
- ``foreign``: JAX functions given minipallas values, and JAX tracers reaching minipallas
  code, as ``TraceError``s naming the JAX call and the minipallas function to use.

``minipallas.numpy`` is the jax.numpy-like namespace over ``values``.
"""
