"""The field presets: true limits unlike the catalog's and the field's shapes, run for real or in
virtual time (`field.virtual`)."""
