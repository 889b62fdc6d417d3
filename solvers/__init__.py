"""The JAX solver core (meshes, layouts, linear solvers, the DAE stepper, inference).

Built in later steps; `campaign` and `schedulers` never import it.
"""
