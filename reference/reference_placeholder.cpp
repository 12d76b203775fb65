// replaced by the FLCE and attention references
