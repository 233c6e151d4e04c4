"""What users hand us, read and checked (pure): hostfiles, configs, and the capped file reads."""
