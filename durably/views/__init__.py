"""How runs read to people, shared by the CLI and the web: what a run does now and next, its
timeline, its Gantt bars, the response models, the breakers. Pure: it reads records it is
given and never a store."""
