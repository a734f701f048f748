"""The spec layer: model (:mod:`.model`), YAML loader (:mod:`.loader`), validator
(:mod:`.validate`) and issue catalogue (:mod:`.issues`). See ``docs/spec-format.md``."""
