"""Artifact sets: `manifest.json` (`Manifest`), the in-process pipeline that computes what the
served ensemble computes (`pipeline.Pipeline`), and the demo build (`demo.build_demo`, with
the corpus it generates when there is no data). Importing this package imports none of
them: the serving side reads `manifest` only, the training side the rest.
"""
