"""The compile driver: a model file and build options to a model for a target.

One module per step (each imported by its own path; this package imports nothing, so that
``import polytf`` stays light)::

    model_source      ModelSource: what is read (path, signature, input shapes, outputs)
    build_options     BuildOptions: how it is built (fallback, threads, target, cache, storage)
    preparation       prepare: read, infer types, graph passes, partition, lower with fallback, place buffers
    recorded_recipes  the kernels' tuning records (cache keys, the storage the options name)
    kernel_compilation  compile steps: a record's recipe, else the default recipe
    model_builder     a model for the target: CompiledModel or CudaModel; load_model
    target_selection  the target a name stands for (cpu, cuda)
    op_coverage       how each op of a model runs (``polytf ops --model``)
"""
