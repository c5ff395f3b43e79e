"""Lemma packs shipped with graphguard; each subpackage is a plugin registered by entry point."""
