"""A stand-in for verl's package, for tests: its one module, ``verl.trainer.main_ppo``, runs rlcore
(``tests/config/foreign/verl_examples/README.md``)."""
