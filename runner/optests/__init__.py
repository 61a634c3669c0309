"""ONNX Runtime Web's own operator tests as suite models (``ort_op_tests:`` in a suite).

``reader`` reads the ``js/web/test/data/ops/*.jsonc`` files as they are (``jsonc`` parses them),
one model per case of each test; ``runner.workload.optest`` builds each test's one-node model;
``skips`` says why a case cannot run here before it runs; ``summary`` counts what a run found
per file, test and case. The judge checks each case against the file's expected outputs, against
onnxruntime on the CPU, and its capture against eager.
"""
