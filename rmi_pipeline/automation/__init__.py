"""Jobs and sensors: how the loop is started, by a person or by new feedback."""
