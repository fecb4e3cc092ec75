"""Building artifact sets: the fitted blend (`blend.train_blend`) and the demo build
(`demo.build_demo`, with the corpus it generates when there is no data). Importing this
package imports none of them. The sets' layout and `manifest.json` are `layout`'s; what
they compute in process is `pipeline.Pipeline`'s.
"""
