"""What z.ai is: its catalog of models, its error codes, its timing."""
