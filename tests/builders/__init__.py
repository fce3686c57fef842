"""Model builders and helpers shared by test modules.

No test module imports another test module: what two of them (or tests/gpu/test_shader_validation.py's
table, through each module's `validation_models()`) need lives here, one module per topic, named
after the test module it came from. hostile.py, isolate.py and graphs.py serve tests/robustness/
(hostile inputs, the child process each case runs in, random graphs for the fuzzer).
"""
