"""Relation inference (paper §3-§4): listings in infer.py, e-graph in egraph.py, lemmas in lemma.py."""
