"""The compile driver: a model file and build options to a model for a target.

One module per step (each imported by its own path; this package imports nothing, so that
``import polytf`` stays light)::

    model_source      ModelSource: what is read (path, signature, input shapes, outputs)
    build_options     BuildOptions: how it is built (fallback, threads, target, cache, storage)
    preparation       prepare: read, infer types, graph passes, partition, lower with fallback, place buffers
    recorded_recipes  the kernels' tuning records (cache keys, the storage the options name)
    kernel_compilation  compile steps: a record's recipe, else the default recipe
    code_cache        compiled-code cache: link cached object code, compile each distinct kernel once
    kernel_objects    a compiled kernel as a cache entry (object code and kernel facts); a job to compile
    compile_workers   compile many kernels at once in worker processes
    model_builder     a CPU model: CompiledModel
    backends          the Backend record, chosen once: target, threads, model kind, kernel measurement, device
    loading           load_model: the steps above for the backend the options name
    op_coverage       how each op of a model runs (``polytf ops --model``)
    partial_typing    shape inference as far as it goes: the nodes it accepts, why the others not
"""
