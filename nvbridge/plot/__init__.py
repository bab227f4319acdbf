"""Pictures of a report: the timeline of a step (``picture``), the roofline (``roofline``), drawn
to the pixel (``pixels``, ``draw``) with matplotlib, imported only when drawing."""
