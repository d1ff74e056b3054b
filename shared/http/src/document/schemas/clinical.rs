//! Patients, practitioners, appointments, timelines and disclosures.

use clinic_core::{appointments, disclosures, events, patients, practitioners};

use crate::cursor::Page;

super::derived! {
    Appointment = appointments::Appointment, Answer;
    NewAppointment = appointments::NewAppointment, Body;
    Reschedule = appointments::Reschedule, Body;
    Cancel = appointments::Cancel, Body;
    Complete = appointments::Complete, Body;
    AppointmentList = Page<'static, appointments::Appointment>, Answer;
    Patient = patients::Patient, Answer;
    NewPatient = patients::NewPatient, Body;
    PatientChanges = patients::PatientChanges, Body;
    PatientList = Page<'static, patients::Patient>, Answer;
    Practitioner = practitioners::Practitioner, Answer;
    NewPractitioner = practitioners::NewPractitioner, Body;
    PractitionerChanges = practitioners::PractitionerChanges, Body;
    PractitionerList = Page<'static, practitioners::Practitioner>, Answer;
    /// Its items refer to `Envelope`: the events' own type, as the API writes it.
    Timeline = Page<'static, events::Envelope>, Answer;
    /// Its items refer to `Disclosure`.
    DisclosureList = Page<'static, disclosures::Disclosure>, Answer;
}
