"""The eldercare domain: patients and their records, and the context provider that
brings a patient's record into the turns about them."""
