"""Writing outputs safely: staging names beside the destination, all-or-nothing publish
(``publish``), names the file system takes (``names``), and interrupts held off meanwhile
(``interrupts``)."""
